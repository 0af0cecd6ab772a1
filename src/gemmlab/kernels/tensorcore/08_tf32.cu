// Tensor-core step 08 -- TF32: tc07's machinery for fp32 matrices, when the caller asks for TF32.
//
// wgmma multiplies fp32 inputs as TF32 (10 mantissa bits; fp32 accumulation) at half the bf16
// rate, but only with both operands K-major: it has no transposed TF32 form. A is K-major as it
// comes; B ([K][N], N contiguous) is not, so gemm() hands this kernel Bt = B^T ([N][K], a copy made
// by torch), and both tiles are loaded as K-major boxes of 32 fp32 (one 128-byte swizzle row).
//
// Otherwise as tc07: persistent blocks walking grouped tiles, pairs of blocks sharing their Bt
// tiles by TMA multicast, a producer warpgroup and two consumer warpgroups of m64n256k8 MMAs. The
// epilogue writes fp32 pairs from registers (8-byte stores).
#include "common/tma.cuh"

// BM x BN: one block's tile (BM / 64 consumer warpgroups, BN = 256). BK = 32 fp32 (128 bytes).
// CM: blocks per cluster along M (1 or 2), sharing Bt. GROUP: cluster rows per scheduling group.
//
// Shared layout of one stage (1024-byte aligned, 128-byte swizzled, K-major):
//   A:  [BM][32]    one box of BM rows x 32 K-elements
//   Bt: [BN][32]    rows n of Bt (columns of B), 32 K-elements each; CM boxes of BN / CM rows
template <int BM, int BN, int BK, int STAGES, int CM, int GROUP>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
tc_tf32(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmBt,
        const float* A, const float* Bt, const float* C, float* D, int M, int N, int K, int lda, int ldbt, int ldc,
        int ldd, float alpha, float beta) {
    constexpr int CONSUMERS = BM / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(float);
    constexpr int MY_B_ROWS = BN / CM;  // rows of the Bt tile this block loads (and multicasts)
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups (64 or 128 rows)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 256, "one m64n256k8 MMA a warpgroup and k8 step");
    static_assert(BK == 32, "a K stage is one 128-byte swizzle row: 32 fp32");
    static_assert(CM == 1 || CM == 2, "clusters of 1 or 2 blocks along M");
    static_assert(STAGES >= 2 && GROUP >= 1, "a ring of at least two stages; groups of at least one row");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    float* sA = reinterpret_cast<float*>(smem);  // [STAGES][BM][32]
    float* sB = sA + STAGES * STAGE_A;           // [STAGES][BN][32]
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sB + STAGES * STAGE_B);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = CM > 1 ? gemmlab::cluster_rank() : 0;
    const int KT = gemmlab::ceil_div(K, BK);
    const int tiles_m = gemmlab::ceil_div(M, BM * CM), tiles_n = gemmlab::ceil_div(N, BN);
    const int tiles = tiles_m * tiles_n, first = blockIdx.x / CM, stride = gridDim.x / CM;

    auto tile_origin = [&](int t, int& row0, int& col0) {
        gemmlab::grouped_tile_origin(t, tiles_m, tiles_n, GROUP, CM, static_cast<int>(rank), BM, BN, row0, col0);
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmBt);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CM);  // every consumer of the cluster releases
    }
    if constexpr (CM > 1) gemmlab::cluster_sync(); else __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            int it = 0;
            for (int t = first; t < tiles; t += stride) {
                int row0, col0;
                tile_origin(t, row0, col0);
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                    gemmlab::tma_load_2d(sA + stage * STAGE_A, &tmA, &full[stage], row0, k0);
                    float* dst = sB + stage * STAGE_B + rank * MY_B_ROWS * BK;
                    const int n0 = col0 + static_cast<int>(rank) * MY_B_ROWS;
                    if constexpr (CM > 1)
                        gemmlab::tma_load_2d_multicast(dst, &tmBt, &full[stage], n0, k0,
                                                       static_cast<unsigned short>((1u << CM) - 1));
                    else
                        gemmlab::tma_load_2d(dst, &tmBt, &full[stage], n0, k0);
                }
            }
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1;
        // Both K-major with 128-byte rows: 8-row groups 1024 bytes apart; a k8 step is 32 bytes.
        const unsigned long long desc_a0 = gemmlab::wgmma_desc(sA + c * 64 * BK, 16, 1024);
        const unsigned long long desc_b0 = gemmlab::wgmma_desc(sB, 16, 1024);
        int it = 0;
        for (int t = first; t < tiles; t += stride) {
            int row0, col0;
            tile_origin(t, row0, col0);
            float acc[128];
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int stage = it % STAGES;
                gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                const unsigned long long da = desc_a0 + (stage * STAGE_A * 4 >> 4);
                const unsigned long long db = desc_b0 + (stage * STAGE_B * 4 >> 4);
                gemmlab::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK; kk += 8)
                    gemmlab::wgmma_m64n256k8_tf32(acc, da + ((kk * 4) >> 4), db + ((kk * 4) >> 4));
                gemmlab::wgmma_commit();
                gemmlab::wgmma_wait<1>();
#pragma unroll
                for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
            }
            gemmlab::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
            if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
            gemmlab::store_accumulators<float>(acc, C, D, row0 + c * 64, col0, M, N, ldc, ldd, alpha, beta);
        }
    }
    __syncwarp();
    if constexpr (CM > 1) gemmlab::cluster_sync();
}
