"""Probe (not part of the package): is tc07's whole-tile main loop short of MMAs in flight?

At 512 tokens (512 x 4096 x 14336, one wave of 128 x 128 tiles in pairs) tc07 takes about 6% more
cycles than cuBLAS's kernel with the same tile, cluster and stages, and as many without its loads
(probe_07_noload, Nsight Compute, 2026-11-25): the loop itself, not its operands. Each consumer
keeps one K stage's MMAs in flight while it waits for the stage before (wait<1>). Copies of tc07:
  deepq   two stages' MMAs in flight (wait<2>); a stage is released two steps behind.
  nofence wgmma.fence (WARPGROUP.ARRIVE) only before a tile's first K stage, where the accumulators
          were zeroed by ordinary instructions: the PTX ISA orders accumulator accesses between
          MMAs of one shape without it (and without the empty asm statements that pin the
          accumulators after each stage's wait, which ptxas reads as register accesses: C7519).
  split   each consumer's 64 x BN as two 64 x BN/2 halves, their MMAs alternating within a k16
          step (two independent accumulator chains; A read twice from shared memory).
Times them beside tc07 and cuBLAS (B a transposed view, as x @ w.t()). On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/deepq_probe.py 512x4096x14336 ..."""
import sys

import probe_record
import smem_probe
from gemmlab import registry

LOOP_OLD = smem_probe.K_STEP + """                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                }
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
"""
DEEP_STEP = smem_probe.K_STEP_WRITTEN
LOOP_NEW = DEEP_STEP.replace("wgmma_wait<1>", "wgmma_wait<2>") + """                    if (kt > 1) gemmlab::release_stage<CM>(&empty[(it - 2) % STAGES]);
                }
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (KT > 1) gemmlab::release_stage<CM>(&empty[(it - 2) % STAGES]);
                if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
"""


HALF = "*reinterpret_cast<float(*)[BN / 4]>(acc{})"
SPLIT_MMA = "".join(
    f"                        gemmlab::wgmma_m64nk16_narrow<T, BN / 2, TA, TB ? 0 : 1>({HALF.format(off)}, "
    f"da + gemmlab::k_offset<1 - TA>(kk), db + {right}gemmlab::k_offset<TB>(kk));\n"
    for off, right in (("", ""), (" + BN / 4", "((BN / 2 * BK * 2) >> 4) + ")))


NOFENCE_STEP = smem_probe.K_STEP_WRITTEN.replace("                    gemmlab::wgmma_fence();\n", "                    if (kt == 0) gemmlab::wgmma_fence();\n").replace(
    "#pragma unroll\n                    for (int i = 0; i < BN / 2; ++i) gemmlab::wgmma_fence_operand(acc[i]);\n", "")


def register() -> dict:
    return {registry.TC_07.id: None, smem_probe.variant("deepq", (LOOP_OLD, LOOP_NEW)): None,
            smem_probe.variant("split", (smem_probe.K_STEP, smem_probe.k_step(SPLIT_MMA))): None,
            smem_probe.variant("nofence", (smem_probe.K_STEP, NOFENCE_STEP)): None}


def configs(bn: int, stages: int):
    """tc07 and its copy in one config (B stored transposed)."""
    from gemmlab.bench.run import parse_kernel_config

    spec = f"[BN={bn},CM=2,STAGES={stages},EPI=0,TB=1,HO=0]"
    return {kid + "@" + f"{bn}": parse_kernel_config(kid + spec)[1] for kid in register()}


if __name__ == "__main__":
    kernels = {}
    for bn, stages in ((128, 6), (256, 4)):
        kernels.update(configs(bn, stages))
    probe_record.run("deepq", __doc__, kernels, sys.argv[1:] or ["512x4096x14336"], layout="nt")
