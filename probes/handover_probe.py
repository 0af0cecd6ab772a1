"""Probe (not part of the package): does tc07's epilogue overlap the MMAs around it?

tc07's consumers used to finish a tile's last K step (wgmma_wait<0>), then write all 64 x 256
accumulators before the next tile's first MMA: the tensor pipe idled through every epilogue, about
2.3 k cycles a tile at 4096^3 (Nsight Compute, 2026-11-24: 3% of the kernel). The hand-over (tc07's
HO = 1 since 2026-11-24; the kernel's header says how) splits the accumulators in two halves of
64 x 128 and stores the left half while the right half's last MMAs run.

This probe's first version (commit 0422ccf: `git show 0422ccf:probes/handover_probe.py`) wrote the
hand-over as copies of the tc07 of then, found by compiling which forms ptxas leaves asynchronous
-- none where a branch or the loop's back edge lies between a half's group and the wait after
which it is read, none where m64n256 and m64n128 MMAs share registers, none where both halves are
read after waits that leave a group running -- and timed them on an H200 (probe-handover-
20261124T154047Z.json, with handover_l2 in -20261124T154234Z.json):
  handover_l   the left half overlaps (what tc07 has now);
  handover_r   the right half overlaps the next tile's first left-half stage instead: within 0.3%
               of handover_l, 3% behind it at 2000 x 2048 x 100;
  handover_l2  the left half two stages ahead of the right: 0.8% behind handover_l at 4096^3;
  split        two m64n128 MMAs a k16 step, no hand-over: 0.5% behind tc07 at 4096^3, even at
               6144^3 and 8192^3;
  wide         tc07 compiled for 232 registers and launched with 168: no change.

Now it times tc07 with and without the hand-over (HO = 1 / 0), the split copy, and
  handover_both  the right half too leaves while MMAs run: those of the next tile's first left-half
                 stage (commit 3fa094b, reverted; probe-handover-20261124T173431Z.json, where
                 tc07_persistent_cluster is this copy and probe_07_handover_left today's tc07):
                 within 0.2% of tc07 at 4096^3-8192^3, +0.6% at 3135 x 4104 x 1000, -1.3% at
                 2000 x 2048 x 100;
beside cuBLAS, results checked against float64 first. With `fp32` first, bf16 inputs and fp32
results: tc07, which hands them over too since ffa3c07, against a copy whose fp32 results take the
whole-tile loop, as tc07's did before (probe-handover-fp32-20261124T180725Z.json, made at 72699ce,
where tc07_persistent_cluster is the whole-tile kernel and probe_07_handover_fp32 the hand-over).
On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/handover_probe.py 4096 6144 8192
    PYTHONPATH=src:probes OUT=$OUT python3 probes/handover_probe.py fp32 4096 6144 8192"""
import dataclasses
import sys

import torch

from gemmlab import jit, registry

import probe_record
import smem_probe

# At 168 registers (the most 384 threads can launch with) ptxas serialises two m64n128 MMAs a k16
# step (C7511). So the split copy compiles for 232 -- the consumers' count after setmaxnreg -- and
# launches with 168, as tc07's hand-over does (launch_registers; gemmlab.cubin checks that the code
# before setmaxnreg stays below R168).
WIDE = ("__maxnreg__(BM == 192 ? 160 : BM == 128 && !(HO && BN == 256 && EPI == 0) ? 168 : 232)",
        "__maxnreg__(BM == 192 ? 160 : 232)")

# tc07's whole-tile K step as two m64n128 MMAs a k16 step (the split copy)
TC07_SPLIT = smem_probe.k_step("""                        static_assert(BN == 256, "the split copy: 128 x 256");
                        float (&left)[64] = *reinterpret_cast<float(*)[64]>(acc);
                        float (&right)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);
                        constexpr unsigned long long B_RIGHT = (128 * BK * sizeof(T)) >> 4;
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(left, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(right, da + gemmlab::k_offset<1 - TA>(kk),
                                                               db + B_RIGHT + gemmlab::k_offset<TB>(kk));
""")


def register() -> dict:
    """{kernel id: config}: tc07 without and with the hand-over and the split copy, all 128 x 256
    with tc07's benchmark config (four stages, clusters of two, EPI = 0)."""
    split = smem_probe.variant("split", (smem_probe.K_STEP, TC07_SPLIT), WIDE)
    spec = registry.get(split)
    registry._BY_ID[split] = dataclasses.replace(spec, launch_registers=lambda c: 168 if c["BM"] == 128 else None)
    base = dict(BM=128, BN=256, BK=64, STAGES=4, CM=2, GROUP=8, EPI=0)
    copy = smem_probe.variant("copy")
    both = smem_probe.variant("handover_both", *((new, old) for old, new in LEFT_ONLY))
    return {copy: registry.get(copy).config(**base, HO=0), registry.TC_07.id: registry.TC_07.config(**base, HO=1),
            both: registry.get(both).config(**base, HO=1), split: registry.get(split).config(**base, HO=0)}


# The edits between the hand-over tc07 has (only the left half overlaps MMAs; the right half also
# waits for the next left half's first stage, wait<0>, before it leaves) and handover_both (commit
# 3fa094b, reverted: the right half leaves while that stage runs), as (handover_both's text, tc07's).
LEFT_ONLY = (
    ("""                    start_half(left, stage, 0);
                    gemmlab::wgmma_wait<1>();
#pragma unroll
                    for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(right[i]);""",
     """                    start_half(left, stage, 0);
                    gemmlab::wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);"""),
    ("""                    if (!next) {
                        gemmlab::wgmma_wait<0>();
                        break;
                    }""", """                    if (!next) break;"""),
    ("""                    start_half(right, stage, B_RIGHT);
                    // The left half's first stage ends here, before the loop's back edge: a group
                    // that crosses it in flight must not be read after the next wait<1>.
                    gemmlab::wgmma_wait<1>();""", """                    start_half(right, stage, B_RIGHT);"""),
)


def register_fp32() -> dict:
    """{kernel id: config}: tc07, which hands fp32 results over too (each half one 64 x 64 fp32 chunk
    through both staging buffers), and a copy whose fp32 results take the whole-tile loop."""
    copy = smem_probe.variant("whole_fp32", (
        "constexpr bool HAND_OVER = HO && BN == 256 && BM == 128 && EPI == 0;",
        "constexpr bool HAND_OVER = HO && BN == 256 && BM == 128 && EPI == 0 && sizeof(TD) == 2;"))
    base = dict(BM=128, BN=256, BK=64, STAGES=4, CM=2, GROUP=8, EPI=0, HO=1)
    return {registry.TC_07.id: registry.TC_07.config(**base), copy: registry.get(copy).config(**base)}


def check_logs(kernels: dict, out_dtype=None) -> None:
    """Every kernel compiles without ptxas serialising its MMAs (one that did would time ptxas's
    fallback, not the idea)."""
    for kid, cfg in kernels.items():
        log = jit.compile_kernel(registry.get(kid), cfg, "sm_90a", torch.bfloat16, out_dtype).log
        assert "C751" not in log and "serialized" not in log, f"{kid}: {log}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["fp32"]:  # bf16 inputs, fp32 results
        kernels = register_fp32()
        check_logs(kernels, torch.float32)
        probe_record.run("handover-fp32", __doc__, kernels, sys.argv[2:] or ["4096"], out_dtype=torch.float32)
    else:
        kernels = register()
        check_logs(kernels)
        probe_record.run("handover", __doc__, kernels, sys.argv[1:] or ["4096"])
