"""Probe (not part of the package): does cuBLAS's 128 x 128 kernel win its main loop by giving the
whole tile to one warpgroup?

At 512 tokens cuBLAS runs nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT (probe-cublas-kernels-bf16-nt-*):
tc07's tile, stages and cluster, yet about 6% fewer cycles (ncu, 512 x 4096 x 14336, 2026-11-25).
Its 256 x 128 and 192 x 128 kernels are named "coop" (two warpgroups share a tile); the 128 x 128 one
is not. tc07 splits the tile between two consumers of 64 x 128 (one m64n128k16 a k16 step each).
The copy here (probe_07_tall, 128 x 128 tiles only) gives the whole tile to consumer 0: two
m64n128k16 a k16 step, rows 0-63 and 64-127 from the same B, 128 accumulators; consumer 1 idles
and the ring's stages wait for one release a block. Shared-memory reads per k16 step are the same
12 KB; what changes is that one warpgroup issues every MMA.
Times it beside tc07 and cuBLAS (B a transposed view, as x @ w.t()). On the GPU machine:
    PYTHONPATH=src:probes GEMMLAB_CACHE_DIR=/tmp/gc python3 probes/tall_probe.py 512x4096x14336 ..."""
import sys

import probe_record
import smem_probe
from gemmlab import registry

src = smem_probe.src
LOOP_START = "            for (int t = first; t < tiles; t += stride) {\n                int row0, col0;\n                tile_origin(t, row0, col0);\n                float acc[BN / 2];\n"
LOOP_END = """                gemmlab::store_tile_64xn<TD, BN / 2, EPI, OB>(acc, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64, col0,
                                                          M, N, ldc, ldd, alpha, beta);
            }
"""
i0 = src.index(LOOP_START)
OLD_LOOP = src[i0:src.index(LOOP_END, i0) + len(LOOP_END)]

# A tile's origin and its 128 x 128 accumulators (two halves of 64 rows), zeroed.
TILE_START = """                int row0, col0;
                tile_origin(t, row0, col0);
                float acc[128];
                float (&top)[64] = *reinterpret_cast<float(*)[64]>(acc);
                float (&bottom)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);
#pragma unroll
                for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
"""
# One K stage into a whole 128 x 128 tile: rows 0-63 (top) and 64-127 (bottom) of A's stage from
# descriptor da, against B's from db, two m64n128k16 a k16 step, as one group; wait for the group before.
TILE_MMAS = """                    gemmlab::wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK; kk += 16) {
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(top, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                        gemmlab::wgmma_m64nk16<T, 128, TA, TB>(bottom, da + A_LOW + gemmlab::k_offset<1 - TA>(kk),
                                                               db + gemmlab::k_offset<TB>(kk));
                    }
                    gemmlab::wgmma_commit();
                    gemmlab::wgmma_wait<1>();
#pragma unroll
                    for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
"""
TALL_LOOP = """            static_assert(BM == 128 && BN == 128, "probe_07_tall: 128 x 128 tiles, one consumer a tile");
            constexpr unsigned long long A_LOW = (64 * BK * sizeof(T)) >> 4;  // rows 64-127 of A's stage
            if (c == 0) for (int t = first; t < tiles; t += stride) {
""" + TILE_START + """                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES;
                    gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                    const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
                    const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
""" + TILE_MMAS + """                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                }
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                gemmlab::store_tile_64xn<TD, 64, EPI, OB>(top, C, D, &tmD, out, tma_store, 1, row0, col0, M, N, ldc, ldd,
                                                          alpha, beta);
                gemmlab::store_tile_64xn<TD, 64, EPI, OB>(bottom, C, D, &tmD, out, tma_store, 1, row0 + 64, col0, M, N,
                                                          ldc, ldd, alpha, beta);
            }
"""
# ksplit: both consumers hold the whole 128 x 128 tile and take alternate K steps (consumer c the
# steps whose ring position has parity c), so each stage is released by one consumer; at the tile's
# end consumer 1's partial sums pass through the staging buffers (32 KB: two rounds of 64 floats a
# thread), consumer 0 adds them and stores the tile.
KSPLIT_LOOP = """            static_assert(BM == 128 && BN == 128, "probe_07_ksplit: 128 x 128 tiles, K steps split between consumers");
            constexpr unsigned long long A_LOW = (64 * BK * sizeof(T)) >> 4;  // rows 64-127 of A's stage
            float* red = reinterpret_cast<float*>(sOut);  // both consumers' staging buffers: 64 floats a thread
            for (int t = first; t < tiles; t += stride) {
""" + TILE_START + """                const int base = it;  // the ring position of the tile's first K step
                int last = -1;        // this consumer's last K step of the tile, not yet released
                for (int kt = (c - base) & 1; kt < KT; kt += 2) {
                    const int pos = base + kt, stage = pos % STAGES;
                    gemmlab::mbar_wait(&full[stage], (pos / STAGES) & 1);
                    // desc_a0 points at this consumer's 64 rows; both consumers read all 128 here
                    const unsigned long long da = desc_a0 - c * A_LOW + (stage * STAGE_A * 2 >> 4);
                    const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
""" + TILE_MMAS + """                    if (last >= 0) gemmlab::release_stage<CM>(&empty[last % STAGES]);
                    last = pos;
                }
                it = base + KT;
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (last >= 0) gemmlab::release_stage<CM>(&empty[last % STAGES]);
                // consumer 0's stores of the last tile have read the staging buffers
                if (c == 0 && ctid == 0) gemmlab::bulk_wait_read<0>();
                gemmlab::named_barrier(3, 256);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (c == 1) {
#pragma unroll
                        for (int i = 0; i < 64; ++i) red[i * 128 + ctid] = acc[64 * h + i];
                    }
                    gemmlab::named_barrier(3, 256);
                    if (c == 0) {
#pragma unroll
                        for (int i = 0; i < 64; ++i) acc[64 * h + i] += red[i * 128 + ctid];
                    }
                    if (h == 0) gemmlab::named_barrier(3, 256);
                }
                if (c == 0) {
                    gemmlab::store_tile_64xn<TD, 64, EPI, OB>(top, C, D, &tmD, out, tma_store, 1, row0, col0, M, N, ldc, ldd,
                                                              alpha, beta);
                    gemmlab::store_tile_64xn<TD, 64, EPI, OB>(bottom, C, D, &tmD, out, tma_store, 1, row0 + 64, col0, M, N,
                                                              ldc, ldd, alpha, beta);
                }
            }
"""
RING_OLD = "gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CM);"
RING_NEW = "gemmlab::init_ring(full, empty, STAGES, CM);"


def register() -> dict:
    return {registry.TC_07.id: None, smem_probe.variant("tall", (OLD_LOOP, TALL_LOOP), (RING_OLD, RING_NEW)): None,
            smem_probe.variant("ksplit", (OLD_LOOP, KSPLIT_LOOP), (RING_OLD, RING_NEW)): None}


if __name__ == "__main__":
    from gemmlab.bench.run import parse_kernel_config

    args = sys.argv[1:]
    layout = "nn" if "--nn" in args else "nt"
    tb = int(layout == "nt")
    kernels = {}
    for kid in register():
        for cm in (2, 1):
            kernels[f"{kid}@cm{cm}"] = parse_kernel_config(kid + f"[BN=128,CM={cm},STAGES=6,EPI=0,TB={tb},HO=0]")[1]
    kernels["auto"] = None
    probe_record.run("tall", __doc__, kernels, [a for a in args if not a.startswith("--")] or ["512x4096x14336"],
                     layout=layout)
