"""Probe (not part of the package): does the producer's polling slow the consumers' MMAs?

At 512 x 4096 x 14336 (one wave of 128 x 128 tiles in pairs) tc07 issues 75% more instructions than
cuBLAS's kernel with the same tile (IPC 0.85 against 0.48, ncu-compare-512x4096x14336-s28.csv), its
warps average 27.9 active threads against 32.0 -- a one-thread loop: the producer, which spends most
of a K step waiting for a stage to be released, in gemmlab::mbar_wait (try_wait in a branch loop).
It shares its scheduler with a warp of each consumer; a wgmma leaves only once all four warps of
the warpgroup have issued it. Copies of tc07:
  hintP   the producer's wait passes try_wait a suspend-time hint (the thread sleeps in the
          barrier until the phase completes or the hint's time runs out);
  hintAll every wait of the kernel does (the consumers' waits for full stages too);
  sleepP  the producer backs off with nanosleep(64) between failed tries.
Times them beside tc07 and cuBLAS. On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/hint_probe.py [--nn] SHAPE..."""
import sys

import probe_record
import smem_probe
from gemmlab import registry

src = smem_probe.src
INCLUDE = '#include "common/tma.cuh"\n'
HELPERS = INCLUDE + r"""
// probe: mbar_wait with try_wait's suspend-time hint (ns), and with a nanosleep back-off
__device__ __forceinline__ void mbar_wait_hint(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(gemmlab::smem_addr(bar)), "r"(parity), "r"(0x989680u)
        : "memory");
}
__device__ __forceinline__ void mbar_wait_sleep(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (true) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n" : "=r"(done) : "r"(gemmlab::smem_addr(bar)), "r"(parity) : "memory");
        if (done) break;
        __nanosleep(64);
    }
}
"""
PRODUCER_WAIT = "gemmlab::mbar_wait(&empty[stage]"


def copy(name: str, text: str) -> str:
    """Register `text` (a whole edited copy of tc07) as probe_07_<name>."""
    return smem_probe.variant(name, (src, text))


def tc07_choice(M: int, N: int, K: int, layout: str):
    """tc07's own config for the shape (HO = 1 where it applies), which the copies take too."""
    import torch
    from gemmlab import configs
    from gemmlab.problem import problem_from_tensors

    a = torch.empty(M, K, dtype=torch.bfloat16)
    b = torch.empty(N, K, dtype=torch.bfloat16).t() if layout == "nt" else torch.empty(K, N, dtype=torch.bfloat16)
    return configs.select(problem_from_tensors(a, b, device_type="cpu"), registry.TC_07.id, device="cuda")[1]


def register() -> dict:
    base = src.replace(INCLUDE, HELPERS)
    assert src.count(PRODUCER_WAIT) == 1
    every = base.replace(smem_probe.K_STEP, smem_probe.K_STEP_WRITTEN)
    return {registry.TC_07.id: None,
            copy("hintP", base.replace(PRODUCER_WAIT, "mbar_wait_hint(&empty[stage]")): None,
            copy("hintAll", every.replace("gemmlab::mbar_wait(", "mbar_wait_hint(")): None,
            copy("sleepP", base.replace(PRODUCER_WAIT, "mbar_wait_sleep(&empty[stage]")): None}


if __name__ == "__main__":
    from gemmlab.bench.run import parse_kernel_config

    args = sys.argv[1:]
    layout = "nn" if "--nn" in args else "nt"
    tb = int(layout == "nt")
    shapes = [a for a in args if not a.startswith("--")] or ["512x4096x14336"]
    kernels = {}
    for kid in register():
        # the 128 x 128 tile in pairs (512 tokens), and each copy's own choice (HO = 1 where it applies)
        kernels[f"{kid}@128"] = parse_kernel_config(kid + f"[BN=128,CM=2,STAGES=6,EPI=0,TB={tb},HO=0]")[1]
        kernels[f"{kid}@own"] = lambda m, n, k, kid=kid: registry.get(kid).config(**tc07_choice(m, n, k, layout).as_dict())
    probe_record.run("hint", __doc__, kernels, shapes, layout=layout)
