"""Probe (not part of the package): can tc07's epilogue overlap the MMAs around it?

tc07's consumers finish a tile's last K step (wgmma_wait<0>), then write all 64 x 256 accumulators
before the next tile's first MMA: the tensor pipe idles through every epilogue, about 2.3 k cycles
a tile at 4096^3 (Nsight Compute, 2026-11-24: 3% of the kernel). These copies split the
accumulators in two halves of 64 x 128 (registers 0-63 and 64-127: the layout of two m64n128 MMAs
side by side) and hand a tile over to the next one half at a time:
  - the last K step issues the left half's MMAs, then the right half's, as two groups;
  - the left half is stored; the next tile's first K step starts its left half (scale-d 0: no
    zeroing), the right half is stored, and the next tile's right half starts.
The loop is rotated (an iteration runs a tile's second to last K steps, then the next tile's
first), and the last tile takes the hand-over path too, its next left half multiplying stale
operands into registers already stored: ptxas (NVRTC 13.0) serialises every MMA of the kernel
(C7511/C7514) when a branch or a back edge separates a half's group from the wait after which
its registers are read, and also when m64n256 and m64n128 MMAs share the accumulators -- so the
middle K steps are two m64n128 MMAs a k16 step too (cuBLAS's form: A read twice from shared memory).
It also serialises when both halves are read after wait<1>, so each copy overlaps one:
  handover_l  the left half is stored while the right half's last MMAs run (the next tile's left
              half waits for its first stage before the right half leaves: wait<0>);
  handover_r  the last step waits for both halves; the right half is stored while the next tile's
              first left-half MMAs run;
  split       tc07 with the two m64n128 MMAs a k16 step and its own epilogue: what the split costs;
  wide        tc07 unchanged but for the register count below: what that alone does.
Each copy compiles for 232 registers and launches with 168 (launch_registers). They serve only
tc07's 128 x 256 config with row-major A and B, a 16-bit D, EPI = 0 and at least two K steps
(they trap otherwise). Timed beside an unchanged copy and cuBLAS, results checked against
float64 first. On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/handover_probe.py 4096 6144 8192"""
import dataclasses
import sys

import torch

from gemmlab import jit, registry

import probe_record
import smem_probe

# The consumer's tile loop of tc07, from its first line to the end of the epilogue call.
LOOP_START = "        int it = 0;\n        for (int t = first; t < tiles; t += stride) {\n"
LOOP_END = "M, N, ldc, ldd, alpha, beta);\n        }\n"

# m64n128k16, A K-major, B N-major, d not read (scale-d 0): a half's first MMA of a tile.
REGS = "{" + ", ".join(f"%{i}" for i in range(64)) + "}"
OPS = ", ".join(f'"+f"(d[{i}])' for i in range(64))
FIRST128 = ("template <typename T>\n"
            "__device__ __forceinline__ void wgmma_first128(float (&d)[64], unsigned long long da, unsigned long long db) {\n"
            + "".join(f'    {"if constexpr (is_bf16<T>)" if t == "bf16" else "else"}\n'
                      f'        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.{t}.{t} {REGS}, %64, %65, 0, 1, 1, 0, 1;\\n"\n'
                      f'                     : {OPS} : "l"(da), "l"(db));\n' for t in ("bf16", "f16"))
            + "}\n")

# One half (64 x 128, 64 registers a thread) of a consumer's 64 x 256 accumulators to D through the
# two staging buffers, as tc07's 16-bit EPI = 0 epilogue does it for chunks 2H and 2H + 1.
STORE_HALF = r"""
namespace gemmlab {
""" + FIRST128 + r"""
template <typename TD>
__device__ __forceinline__ void store_half(const float (&acc)[64], const TensorMap* tmD, unsigned char* staging,
                                           int barrier_id, int rows0, int col0, float alpha) {
    constexpr int CHUNK_BYTES = 64 * 64 * 2;
    const int ctid = threadIdx.x % 128, lane = ctid % 32, warp = ctid / 32;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        unsigned char* buf = staging + j * CHUNK_BYTES;
        if (ctid == 0) bulk_wait_read<1>();  // the store that last read buf is done
        named_barrier(barrier_id, 128);
#pragma unroll
        for (int q0 = 0; q0 < 8; q0 += 2) {
            unsigned packed[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const int i = (8 * j + q0 + m / 2) * 4 + 2 * (m % 2);
                packed[m] = pack2<TD>(alpha * acc[i], alpha * acc[i + 1]);
            }
            const int m = lane / 8, row = warp * 16 + 8 * (m % 2) + lane % 8;
            stmatrix_x4(buf + swizzle128_offset(row, q0 + m / 2), packed[0], packed[1], packed[2], packed[3]);
        }
        fence_proxy_async_smem();
        named_barrier(barrier_id, 128);
        if (ctid == 0) {
            tma_store_2d(tmD, buf, rows0, col0 + 64 * j);
            bulk_commit();
        }
    }
}
}  // namespace gemmlab
"""

HANDOVER_LOOP = r"""        static_assert(BN == 256 && sizeof(TD) == 2 && EPI == 0 && TA == 0 && TB == 0,
                      "the hand-over copy: 128 x 256, row-major A and B, 16-bit D, EPI = 0");
        if (KT < 2) __trap();
        float acc[128];
        float (&left)[64] = *reinterpret_cast<float(*)[64]>(acc);
        float (&right)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);
        constexpr unsigned long long B_RIGHT = (128 * BK * sizeof(T)) >> 4;  // columns 128-255 of a B stage
        // One K stage's four k16 MMAs into one half (64 x 128; b_offset: B's columns 0-127 or 128-255).
        auto mma_half = [&](float (&half)[64], int stage, unsigned long long b_offset) {
            const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
            const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4) + b_offset;
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16)
                gemmlab::wgmma_m64nk16<T, 128, TA, TB>(half, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
        };
        // A half's first K stage of a tile: its first MMA does not add (scale-d 0), so no ordinary
        // instruction writes zeros into registers the MMAs own (ptxas would wait for them).
        auto start_half = [&](float (&half)[64], int stage, unsigned long long b_offset) {
            const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
            const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4) + b_offset;
            gemmlab::wgmma_fence();
            gemmlab::wgmma_first128<T>(half, da, db);
#pragma unroll
            for (int kk = 16; kk < BK; kk += 16)
                gemmlab::wgmma_m64nk16<T, 128, TA, TB>(half, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
            gemmlab::wgmma_commit();
        };
        // The loop is rotated so that a half's MMAs and the wait that ends them never straddle its
        // back edge (ptxas cannot count wgmma groups around a loop: it would serialise the MMAs):
        // an iteration runs a tile from its second K step to its last, then the next tile's first.
        int it = 0;
        if (first < tiles) {  // the first tile's first K step, then the loop over tiles
            int t = first;
            gemmlab::mbar_wait(&full[0], 0);
            start_half(left, 0, 0);
            start_half(right, 0, B_RIGHT);
            ++it;
            while (true) {
                int row0, col0;
                tile_origin(t, row0, col0);
                for (int kt = 1; kt < KT - 1; ++kt, ++it) {  // tc07's K step
                    const int stage = it % STAGES;
                    gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                    const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
                    const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
                    gemmlab::wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK; kk += 16)
@MIDDLE@
                    gemmlab::wgmma_commit();
                    gemmlab::wgmma_wait<1>();
#pragma unroll
                    for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                    gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                }
                // The last K step: the left half, then the right half, as two groups.
                int stage = it % STAGES;
                gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                gemmlab::wgmma_fence();
                mma_half(left, stage, 0);
                gemmlab::wgmma_commit();
                mma_half(right, stage, B_RIGHT);
                gemmlab::wgmma_commit();
                gemmlab::wgmma_wait<@LAST_WAIT@>();  // the left half (and every earlier step) is done
#pragma unroll
                for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(left[i]);
                gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                gemmlab::store_half<TD>(left, &tmD, out, 1 + c, row0 + c * 64, col0, alpha);  // while the right half runs
                ++it;
                // The next tile's first K step: its left half starts, this tile's right half leaves
                // (while that runs), its right half starts. The last tile takes the same path (ptxas
                // serialises the MMAs if a branch parts the right half's group from its wait): its
                // left half multiplies the stage's stale operands into registers already stored, and
                // nothing waits for the stage to fill.
                const bool next = t + stride < tiles;
                stage = it % STAGES;
                if (next) gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                start_half(left, stage, 0);
                gemmlab::wgmma_wait<@HAND_WAIT@>();  // this tile's right half is done
#pragma unroll
                for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(right[i]);
                gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                gemmlab::store_half<TD>(right, &tmD, out, 1 + c, row0 + c * 64, col0 + 128, alpha);
                if (!next) break;
                start_half(right, stage, B_RIGHT);
                t += stride;
                ++it;
            }
            gemmlab::wgmma_wait<0>();  // the last tile's stale left-half MMAs: none may run at the exit
        }
"""


# At 168 registers (the most 384 threads can launch with) ptxas serialises the hand-over's MMAs
# (C7511: the right half's epilogue runs with the left half's 64 accumulators in flight). So the
# copy compiles the whole kernel for 232 -- the consumers' count after setmaxnreg -- and launches
# with 168, the cubin rewritten as tc07's 192-row tile is (launch_registers; gemmlab.cubin checks
# that the code before setmaxnreg stays below R168).
WIDE = ("__maxnreg__(BM == 192 ? 160 : BM == 128 ? 168 : 232)", "__maxnreg__(BM == 192 ? 160 : 232)")


def wide(kid: str) -> None:
    spec = registry.get(kid)
    registry._BY_ID[kid] = dataclasses.replace(spec, launch_registers=lambda c: 128 if c["BM"] == 192 else 168 if c["BM"] == 128 else None)


HALVES = """{ gemmlab::wgmma_m64nk16<T, 128, TA, TB>(left, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                          gemmlab::wgmma_m64nk16<T, 128, TA, TB>(right, da + gemmlab::k_offset<1 - TA>(kk),
                                                                 db + B_RIGHT + gemmlab::k_offset<TB>(kk)); }"""
# tc07's own K step with the two m64n128 MMAs a k16 step (the split copy)
TC07_MMA = """                    gemmlab::wgmma_m64nk16<T, BN, TA, TB>(acc, da + gemmlab::k_offset<1 - TA>(kk),
                                                          db + gemmlab::k_offset<TB>(kk));"""
TC07_SPLIT = """                {
                    static_assert(BN == 256 && TA == 0 && TB == 0, "the split copy: 128 x 256, row-major A and B");
                    float (&left)[64] = *reinterpret_cast<float(*)[64]>(acc);
                    float (&right)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);
                    constexpr unsigned long long B_RIGHT = (128 * BK * sizeof(T)) >> 4;
                    """ + HALVES + """
                }"""


def handover(name: str, last_wait: int, hand_wait: int) -> str:
    src = smem_probe.src
    start = src.index(LOOP_START)
    end = src.index(LOOP_END, start) + len(LOOP_END)
    assert src.count(LOOP_START) == 1 and src.count(LOOP_END) == 1
    loop = HANDOVER_LOOP.replace("@MIDDLE@", "                        " + HALVES).replace(
        "@LAST_WAIT@", str(last_wait)).replace("@HAND_WAIT@", str(hand_wait))
    kid = smem_probe.variant(name, (src[start:end], loop),
                             ('#include "common/tma.cuh"\n', '#include "common/tma.cuh"\n' + STORE_HALF), WIDE)
    wide(kid)
    return kid


def register() -> dict:
    """{kernel id: config}: an unchanged copy of tc07, the split copy and the two hand-over copies,
    all 128 x 256 with tc07's benchmark config (four stages, clusters of two, EPI = 0)."""
    kids = [smem_probe.variant("copy"), smem_probe.variant("split", (TC07_MMA, TC07_SPLIT), WIDE),
            handover("handover_l", 1, 0), handover("handover_r", 0, 1), smem_probe.variant("wide", WIDE)]
    wide(kids[1])
    wide(kids[4])
    base = dict(BM=128, BN=256, BK=64, STAGES=4, CM=2, GROUP=8, EPI=0)
    return {kid: registry.get(kid).config(**base) for kid in kids}


def check_logs(kernels: dict) -> None:
    """Every copy compiles without ptxas serialising its MMAs (a copy that did would time ptxas's
    fallback, not the idea)."""
    for kid, cfg in kernels.items():
        log = jit.compile_kernel(registry.get(kid), cfg, "sm_90a", torch.bfloat16).log
        assert "C751" not in log and "serialized" not in log, f"{kid}: {log}"


if __name__ == "__main__":
    kernels = register()
    check_logs(kernels)
    probe_record.run("handover", __doc__, kernels, sys.argv[1:] or ["4096"])
